"""The envace dashboard: a Streamlit multipage app over the trajectory store and MLflow. The folder installs as
`envace_dashboard` (pyproject.toml's package-dir); Streamlit runs `app.py` by path.

`app.py` is the entry script (`envace dashboard` runs it through `envace.dashboard_launch`); the scripts in
`views/` are its pages. The helper modules here hold no algorithm logic: they read through `envace.store`
(a read-only session) and the MLflow client, and shape the results for display.
"""
