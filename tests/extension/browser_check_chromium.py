"""``python -m jupyterlab.browser_check`` with Debian's chromium instead of a downloaded one.

JupyterLab's check runs ``npx playwright install chromium`` (a download from Playwright's CDN)
and ``browser-test.js``, which cannot be pointed at another browser. This script keeps the
check itself (``BrowserApp``: start JupyterLab, load it, fail on any JS or server error) and
replaces only the browser step with the same steps in Python's playwright, launching
``$CHROMIUM_PATH`` (default ``/usr/bin/chromium``). It also checks the workbench's sidebar
is there, i.e. the dtrain-workbench extension activated.
"""

import json
import os
import sys

from jupyterlab import browser_check

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


async def run_browser(url: str) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await browser.new_page()
        await page.goto(url)
        await page.wait_for_selector("#main", timeout=100_000)
        marker = await page.wait_for_selector("#browserTest", state="attached", timeout=100_000)
        await page.wait_for_selector(".completed", state="attached", timeout=100_000)
        errors = json.loads(await marker.text_content() or "[]")
        sidebar_tab = '.jp-SideBar [data-id="dtrain-workbench-sidebar"]'
        activated = await page.locator(sidebar_tab).count() == 1
        await browser.close()
    if errors:
        raise RuntimeError(f"JupyterLab logged errors: {errors}")
    if not activated:
        raise RuntimeError("the dtrain-workbench extension did not activate")
    print("Browser test complete: dtrain-workbench activated", flush=True)


class ChromiumBrowserApp(browser_check.BrowserApp):
    """JupyterLab's ``BrowserApp``, defined here so this script is its extension's module
    (as ``python -m jupyterlab.browser_check`` is: the app is found through ``__main__``)."""

    name = __name__


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": __name__, "app": ChromiumBrowserApp}]


if __name__ == "__main__":
    browser_check.run_browser = run_browser
    ChromiumBrowserApp.launch_instance(sys.argv[1:])
