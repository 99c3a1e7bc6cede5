"""The dashboard's page scripts, run by Streamlit through app.py's navigation (not imported). Not named
`pages/`: Streamlit would list such a folder's files as pages of its own and run them without app.py."""
