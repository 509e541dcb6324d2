"""Presenting results: Markdown for the Dagster UI (HTML reports and trace export come later)."""
