"""pytest plugin (entry point ``railab``): fixtures for testing a lab from a user's own repo."""
