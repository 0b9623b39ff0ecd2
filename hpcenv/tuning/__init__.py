"""Measured collective tuning: sweep what an image offers, keep the winners, apply them by default.

``hpcenv tune --measure --site S`` runs the sweep (:mod:`hpcenv.sweep.measure`) inside the
site's image; the result is a *tuning file* per site and rank layout (:mod:`hpcenv.tuning.model`,
stored by :mod:`hpcenv.tuning.store` under ``<cache>/tuning/<site>/``) that records the chosen
Open MPI ``coll_tuned`` rules and environment, the measurements that chose them, the date and the
image digest. :mod:`hpcenv.tuning.apply` is the one hook that ``submit``/``render`` (job.sh),
``smoke`` and ``bench`` call: it returns the file's environment and rules only when the file was
measured on the same image digest and the same layout, else nothing and a warning.
"""
