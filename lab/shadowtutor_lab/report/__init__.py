"""The evaluation report: one self-contained HTML page (plots as inline SVG, images as base64 PNG)."""
