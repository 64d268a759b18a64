#include "server/page.h"

namespace flashdllm::server {
namespace {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

constexpr const char* kPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>flashdllm — live denoising</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem; color: #222; }
  h1 { font-size: 1.3rem; margin-bottom: .2rem; }
  .sub { color: #666; margin-top: 0; }
  textarea { width: 100%; box-sizing: border-box; font: inherit; padding: .5rem; }
  .row { display: flex; gap: 1rem; align-items: center; margin: .5rem 0 1rem; flex-wrap: wrap; }
  button { font: inherit; padding: .4rem 1.2rem; }
  #canvas { display: flex; flex-wrap: wrap; gap: 2px; font-family: ui-monospace, monospace; font-size: .85rem;
            min-height: 2rem; border: 1px solid #ddd; padding: .5rem; border-radius: 4px; }
  .cell { padding: 1px 3px; border-radius: 3px; background: #eef; white-space: pre; }
  .cell.mask { color: #99a; background: #f3f3f6; }
  .cell.fresh { background: #ffe08a; }
  #answer { white-space: pre-wrap; border-left: 3px solid #4a8; padding: .5rem 1rem; min-height: 1.5rem; }
  #status { color: #555; font-size: .9rem; }
  .error { color: #b00; }
</style>
</head>
<body>
<h1>flashdllm — live denoising</h1>
<p class="sub">Model <code id="model">@MODEL@</code>. Each iteration commits the positions the model is confident about; masks (░) turn into text.</p>
<textarea id="prompt" rows="3" placeholder="Ask something...">Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have at the end?</textarea>
<div class="row">
  <label>max tokens <input id="max-tokens" type="number" value="128" min="1" max="4096"></label>
  <button id="go">Generate</button>
  <span id="status"></span>
</div>
<h2 style="font-size:1rem">Canvas</h2>
<div id="canvas"></div>
<h2 style="font-size:1rem">Answer</h2>
<div id="answer"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const MASK = "\u2591";
let cells = [];

function shown(text) { return text.replace(/\n/g, "\u23ce").replace(/ /g, "\u00a0") || "\u00b7"; }

function makeCanvas(n) {
  const c = $("canvas");
  c.textContent = "";
  cells = [];
  for (let i = 0; i < n; ++i) {
    const d = document.createElement("span");
    d.className = "cell mask";
    d.textContent = MASK;
    c.appendChild(d);
    cells.push(d);
  }
}

function onCanvas(ev) {
  if (ev.canvas_length && cells.length !== ev.canvas_length) makeCanvas(ev.canvas_length);
  for (const d of cells) d.classList.remove("fresh");
  for (let k = 0; k < ev.positions.length; ++k) {
    const d = cells[ev.positions[k]];
    if (!d) continue;
    d.className = "cell fresh";
    d.textContent = shown(ev.texts[k]);
  }
  $("status").textContent = "iteration " + ev.iteration + ", stable tokens " + ev.stable_tokens;
}

async function generate() {
  const prompt = $("prompt").value;
  const maxTokens = parseInt($("max-tokens").value, 10) || 128;
  $("answer").textContent = "";
  $("answer").classList.remove("error");
  makeCanvas(maxTokens);
  $("go").disabled = true;
  const t0 = performance.now();
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({model: $("model").textContent, messages: [{role: "user", content: prompt}],
                            max_tokens: maxTokens, stream: true, stream_canvas: true})
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({error: {message: res.statusText}}));
      throw new Error(err.error ? err.error.message : res.statusText);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "", finish = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let event = "", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (!data || data === "[DONE]") continue;
        const obj = JSON.parse(data);
        if (event === "canvas") { onCanvas(obj); continue; }
        if (obj.error) throw new Error(obj.error.message);
        for (const ch of obj.choices || []) {
          if (ch.delta && ch.delta.content) $("answer").textContent += ch.delta.content;
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
    }
    const s = ((performance.now() - t0) / 1000).toFixed(2);
    $("status").textContent += " \u2014 done (" + finish + ") in " + s + " s";
    $("answer").dataset.done = "1";
  } catch (e) {
    $("answer").textContent = "error: " + e.message;
    $("answer").classList.add("error");
  } finally {
    $("go").disabled = false;
  }
}

$("go").addEventListener("click", generate);
const q = new URLSearchParams(location.search);
if (q.get("prompt")) $("prompt").value = q.get("prompt");
if (q.get("autorun")) generate();
</script>
</body>
</html>
)PAGE";

}  // namespace

std::string live_page_html(const std::string& model_id) {
  std::string page = kPage;
  const std::string key = "@MODEL@";
  const auto at = page.find(key);
  if (at != std::string::npos) page.replace(at, key.size(), html_escape(model_id));
  return page;
}

}  // namespace flashdllm::server
