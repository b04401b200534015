"""``shadowtutor bench network``: the real server and edge agent over a shaped link between two namespaces."""
