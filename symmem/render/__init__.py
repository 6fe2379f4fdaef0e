"""Rendering: tables (Markdown, CSV, LaTeX booktabs), formulas (one LaTeX printer), figures."""
