"""Headless Chromium under Selenium, started from the system's binaries and always cleaned up.

Debian's ``chromium`` and ``chromium-driver`` packages (``/usr/bin/chromium``,
``/usr/bin/chromedriver``) are used as they are: the driver path is given to
Selenium, so Selenium Manager never runs and nothing is downloaded.  Each browser
gets a fresh temporary profile.  ``quit()`` ends the WebDriver session, then kills
whatever is left of the chromedriver process tree (Chromium and its helpers,
recorded while they ran) and removes the profile; it is safe to call twice and
after Chromium has died.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile

from gigpo_gym.core.extras import missing_extra_error

DEFAULT_CHROMIUM = "/usr/bin/chromium"
DEFAULT_CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL_COMMAND = "sudo apt-get install -y chromium chromium-driver"
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
    "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
)  # fmt: skip


class BrowserUnavailableError(RuntimeError):
    """Chromium or chromedriver is not installed where we look."""


def check_binaries(chromium_path: str = DEFAULT_CHROMIUM, chromedriver_path: str = DEFAULT_CHROMEDRIVER) -> None:
    """Raise BrowserUnavailableError naming the missing binary and the install command."""
    for what, path in (("Chromium", chromium_path), ("chromedriver", chromedriver_path)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise BrowserUnavailableError(
                f"{what} not found at {path}; install Debian's browser and driver with: {INSTALL_COMMAND} "
                "(or pass chromium_path= / chromedriver_path=)"
            )


def _import_selenium():
    try:
        import psutil  # noqa: F401  (process-tree cleanup)
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        raise missing_extra_error("browser", "gigpo_gym/WebShop-Browser-v0") from e
    return webdriver, Service


class HeadlessChromium:
    """One headless Chromium driven through chromedriver; ``driver`` is the Selenium WebDriver."""

    def __init__(
        self,
        chromium_path: str = DEFAULT_CHROMIUM,
        chromedriver_path: str = DEFAULT_CHROMEDRIVER,
        window_size: tuple[int, int] = (1280, 900),
        command_timeout: float = 30.0,
    ):
        check_binaries(chromium_path, chromedriver_path)
        webdriver, Service = _import_selenium()
        import psutil

        os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, should anything call it, stays offline
        self.profile_dir = tempfile.mkdtemp(prefix="gigpo-webshop-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = chromium_path
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile_dir}")
        options.add_argument(f"--window-size={window_size[0]},{window_size[1]}")
        service = Service(executable_path=chromedriver_path, log_output=subprocess.DEVNULL)
        self._processes: dict[int, psutil.Process] = {}
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except Exception:
            self._track(service)
            self._kill_tracked()
            shutil.rmtree(self.profile_dir, ignore_errors=True)
            raise
        self.driver.command_executor.client_config.timeout = command_timeout
        self.driver.set_page_load_timeout(command_timeout)
        self.driver.set_script_timeout(command_timeout)
        self._track(service)

    def _track(self, service) -> None:
        """Remember chromedriver and its descendants (Chromium and helpers) so quit() can reap them."""
        import psutil

        process = getattr(service, "process", None)
        if process is None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(process.pid)
            for p in [root, *root.children(recursive=True)]:
                self._processes.setdefault(p.pid, p)

    def refresh_tracking(self) -> None:
        self._track(self.driver.service)

    def pids(self) -> dict[str, list[int]]:
        """Live pids by role: ``chromedriver`` and ``chromium`` (the browser's main process first)."""
        self.refresh_tracking()
        driver_pid = self.driver.service.process.pid
        alive = [p for p in self._processes.values() if _alive(p)]
        browsers = [p.pid for p in alive if p.pid != driver_pid and _parent_pid(p) == driver_pid]
        helpers = [p.pid for p in alive if p.pid != driver_pid and p.pid not in browsers]
        return {"chromedriver": [driver_pid] if _alive(self._processes.get(driver_pid)) else [],
                "chromium": browsers + helpers}  # fmt: skip

    def tracked_pids(self) -> list[int]:
        return sorted(self._processes)

    def quit(self) -> None:
        if getattr(self, "driver", None) is None:
            return
        with contextlib.suppress(Exception):
            self.refresh_tracking()
        self.driver.command_executor.client_config.timeout = 5
        with contextlib.suppress(Exception):
            self.driver.quit()
        self.driver = None
        self._kill_tracked()
        shutil.rmtree(self.profile_dir, ignore_errors=True)

    def _kill_tracked(self) -> None:
        import psutil

        alive = [p for p in self._processes.values() if _alive(p)]
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(alive, timeout=3)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=3)


def _alive(process) -> bool:
    import psutil

    try:
        return process is not None and process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _parent_pid(process) -> int | None:
    import psutil

    try:
        return process.ppid()
    except psutil.Error:
        return None
