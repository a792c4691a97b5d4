"""`insandbox view`: a local web viewer for run folders, benchmark folders and the files runs produced.

Server-rendered HTML (Starlette + Jinja2) with htmx for paging and filtering and Server-Sent Events
for live updates; every asset ships in the package. The data stays on disk: folders are indexed
cheaply (cached by mtime) and large trajectories, file listings and tables are paged server-side.

    app.py         the Starlette app and `serve`
    guard.py       what wraps every answer: the Host check (against DNS rebinding) and the security headers
    routes.py      the pages and fragments
    index.py       finding runs and benchmarks under the root folder (cached by mtime)
    trajectories.py  a run's summary read cheaply, full trajectories cached
    files.py       a run's files: safe paths, paged listings, how each kind is shown
    midi.py        the notes of a MIDI file, as a table
    live.py        the Server-Sent Events stream that tells a page what changed
"""
