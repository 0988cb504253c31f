"""Tests of the service package (mirror service/)."""
