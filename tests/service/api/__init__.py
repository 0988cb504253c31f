"""Tests of the routers, against a live server."""
