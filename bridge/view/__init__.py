"""Layer 7, view: `rgbridge view`, a local web app over the folders `rgbridge report` reads (runs,
evaluate outputs, recordings) and runs still going, with the statistics of bridge/reports/stats.py;
its JSON API, its pages and plots, and the static bundle `--export` writes. It reads reports,
recordings and attempt folders and sits above the agents layer (it reads attempt state).
"""
