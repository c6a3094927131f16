"""Layer 5, reports: what people read — the HTML report of a recording and exports of many recordings."""
