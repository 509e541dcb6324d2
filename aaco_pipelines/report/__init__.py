"""Presenting results (surfaces): the HTML and Markdown session reports, plots, Markdown tables
for the Dagster UI, Perfetto export. May import every layer below."""
