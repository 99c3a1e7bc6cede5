"""Entry script of the envace dashboard (`envace dashboard`, or `streamlit run dashboard/app.py -- --store
PATH --mlflow-uri URI`): page navigation only; each page is a script in views/."""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="envace", layout="wide")

PAGES = [
    st.Page("views/runs.py", title="Runs", default=True),  # the default page is served at / (no url_path)
    st.Page("views/trajectories.py", title="Trajectories", url_path="trajectories"),
    st.Page("views/curves.py", title="Learning curves", url_path="curves"),
    st.Page("views/sweeps.py", title="Sweeps", url_path="sweeps"),
    st.Page("views/benchmarks.py", title="Benchmarks", url_path="benchmarks"),
    st.Page("views/worldbench.py", title="Worldbench", url_path="worldbench"),
]

st.navigation(PAGES).run()
