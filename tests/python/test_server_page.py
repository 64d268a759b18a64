"""The live-denoising page at `/`, in a real headless browser (Debian's chromium through Selenium's
WebDriver): load it, type a prompt, press Generate, watch the canvas fill, take a screenshot, and
check that the answer appeared and equals the API's."""

import shutil
import time

import pytest

from server_fixture import BUILD, MODEL_ID, Server, client

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="Debian's chromium and chromium-driver are not installed")

QUESTION = "Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have at the end?"


def test_the_page_shows_the_canvas_denoise_into_the_answer(tmp_path):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    s = Server("--slots", "2", "--max-model-len", "512")
    try:
        want = client(s).chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}],
                                                 max_tokens=64).choices[0].message.content
        opts = Options()
        opts.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
            opts.add_argument(a)
        drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
        try:
            drv.get(s.base_url + "/")
            assert "live denoising" in drv.title
            assert drv.find_element(By.ID, "model").text == MODEL_ID
            box = drv.find_element(By.ID, "prompt")
            box.clear()
            box.send_keys(QUESTION)
            mt = drv.find_element(By.ID, "max-tokens")
            mt.clear()
            mt.send_keys("64")
            drv.find_element(By.ID, "go").click()
            WebDriverWait(drv, 120).until(lambda d: d.find_element(By.ID, "answer").get_attribute("data-done") == "1")
            answer = drv.find_element(By.ID, "answer").text
            cells = drv.find_elements(By.CSS_SELECTOR, "#canvas .cell")
            masked = drv.find_elements(By.CSS_SELECTOR, "#canvas .cell.mask")
            status = drv.find_element(By.ID, "status").text
            shot = tmp_path / "live_page.png"
            drv.save_screenshot(str(shot))
            (BUILD / "live_page.png").write_bytes(shot.read_bytes())
        finally:
            drv.quit()
        assert answer == want.strip() or answer == want, (answer, want)
        assert "100" in answer
        assert len(cells) == 64
        assert len(masked) < len(cells), "committed positions replaced the masks"
        assert "iteration" in status and "done (stop)" in status
        assert shot.stat().st_size > 10_000
    finally:
        assert s.stop() == 0, "".join(s.log)
