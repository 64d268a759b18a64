// Progress display: terminal bar with rate and ETA redrawn in place; plain periodic lines otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "eval/progress.h"

namespace flashdllm::eval {
namespace {

std::string slurp(FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "--:--");
}

TEST(Progress, LineHasCountRateAndEta) {
  ProgressBar bar("eval gsm8k", 100, "samples", stderr, /*tty=*/true);
  const std::string l = bar.line(25, 10.0, "x");
  EXPECT_NE(l.find("[eval gsm8k] |######.................."), std::string::npos) << l;
  EXPECT_NE(l.find("25/100 (25%)"), std::string::npos) << l;
  EXPECT_NE(l.find("2.50 samples/s"), std::string::npos) << l;
  EXPECT_NE(l.find("elapsed 0:10"), std::string::npos) << l;
  EXPECT_NE(l.find("ETA 0:30"), std::string::npos) << l;
  EXPECT_NE(l.find("  x"), std::string::npos) << l;
  ProgressBar plain("b", 4, "samples", stderr, /*tty=*/false);
  EXPECT_EQ(plain.line(4, 2.0, "").find('|'), std::string::npos);  // no bar in logs
  EXPECT_NE(plain.line(4, 2.0, "").find("ETA 0:00"), std::string::npos);
}

TEST(Progress, TerminalRedrawsInPlaceAndEndsTheLine) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressBar bar("t", 3, "samples", f, true);
  bar.update(1);
  bar.finish();
  const std::string out = slurp(f);
  std::fclose(f);
  EXPECT_EQ(out.front(), '\r');
  EXPECT_NE(out.find("1/3"), std::string::npos) << out;
  EXPECT_NE(out.find("3/3 (100%)"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
}

TEST(Progress, PlainModeWritesPeriodicLines) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar quiet("p", 5, "samples", f, false, /*interval_s=*/3600.0);
    for (int i = 1; i <= 4; ++i) quiet.update(i);  // the first at once (a line at the start), then nothing
    quiet.finish();                                 // the final line always
  }
  ProgressBar chatty("q", 5, "samples", f, false, /*interval_s=*/0.0);
  chatty.update(1);
  chatty.update(2);
  chatty.finish();
  const std::string out = slurp(f);
  std::fclose(f);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2 + 3) << out;
  EXPECT_NE(out.find("[p] 1/5"), std::string::npos) << out;
  EXPECT_NE(out.find("[p] 5/5"), std::string::npos) << out;
  EXPECT_NE(out.find("[q] 2/5"), std::string::npos) << out;
}

}  // namespace
}  // namespace flashdllm::eval
