"""Pytest fixtures that stand stashpoint's whole AWS stack up on moto, and golden envelopes.

Enable the plugin in your `conftest.py`:

    pytest_plugins = ["moto_fixtures.plugin"]
"""
