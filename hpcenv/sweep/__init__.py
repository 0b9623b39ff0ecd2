"""The sweep behind ``hpcenv tune --measure``: run each collective choice the site's image offers
with hpcenv's launch, keep what beats the library's own default (:mod:`hpcenv.sweep.measure`),
in one container per session (:mod:`hpcenv.sweep.session`), for one request of the ``tune``
command (:mod:`hpcenv.sweep.service`).

It stands above the job side (it launches ranks the way jobs do) and writes what it chose as a
tuning file, the model that :mod:`hpcenv.tuning` holds below the job side: a job, smoke and
bench only read that file, so they never reach up to the sweep.
"""
