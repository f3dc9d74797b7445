"""Jupyter Server configuration for the Galata UI tests (never for real use: no security).

The run store is the isolated ``$DTRAIN_RUN_STORE`` the Playwright config created, and the port
``$DTRAIN_UI_TEST_PORT``, so the tests never see the user's runs or a running JupyterLab.
"""

import os

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)
configure_jupyter_server(c)
c.ServerApp.port = int(os.environ.get("DTRAIN_UI_TEST_PORT", "8891"))
c.ServerApp.jpserver_extensions = {"workbench.server": True}
c.ServerApp.allow_root = True  # CI containers run as root
# Uncomment to set server log level to debug level
# c.ServerApp.log_level = "DEBUG"
