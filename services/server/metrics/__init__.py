"""The Prometheus registry and collectors: server metrics, per-edge fleet metrics, GPU sampling."""
