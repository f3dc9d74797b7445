"""dtrain workbench."""
