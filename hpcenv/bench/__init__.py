"""``hpcenv bench``: one run that measures what hpcenv costs and buys, with ratios.

Sections (:mod:`hpcenv.bench.runner` runs them in this order, ``--section`` picks some):

* ``startup``, ``memcopy``, ``allreduce`` (:mod:`~hpcenv.bench.comm`): the container tax on
  2-rank allreduce (same check script and launch, bare host vs the image), Horovod over MPI and
  Gloo and torch gloo vs raw MPI in the same image, each as a fraction of the numpy copy
  bandwidth measured in the same run;
* ``tuning``, ``mnist`` (:mod:`~hpcenv.bench.comm`): hpcenv's launch settings
  (:func:`hpcenv.jobs.placement.place` + the site's ``tuning:`` env) vs a naive launch, every Open
  MPI coll_tuned allreduce algorithm and a per-size rules file made from them, Horovod knobs;
* ``kmeans`` (:mod:`~hpcenv.bench.compute`): daal4py float32 SPMD and batch vs scikit-learn;
* ``training`` (:mod:`~hpcenv.bench.training`): a public training benchmark (pytorch/examples
  minGPT-DDP) built through a user recipe, samples/s under hpcenv's default launch vs a naive
  one vs the project's documented one, on one node and on the two rehearsal nodes;
* ``cli``: rendering every site x recipe, ``hpcenv --help``;
* ``rebuild`` (:mod:`~hpcenv.bench.userbuild`): a user recipe rebuilt after a change to its
  requirements;
* ``build`` (:mod:`~hpcenv.bench.buildcost`): cold/warm build and size of the daal4py recipe as
  hpcenv renders it vs a naive single-stage Dockerfile vs an hpccm recipe
  (:mod:`~hpcenv.bench.hpccm_daal4py`); ``full-build`` (on request) the full image, kept as a
  record the ``build`` section reports;
* ``targets`` (:mod:`~hpcenv.bench.targets`): the goals one run cannot measure (the tuning floor
  over three runs, from a history; set-up time; the public training benchmark when ``training``
  did not run), with why.

:mod:`~hpcenv.bench.report` holds the pure part (ratio math, Markdown/JSON, plots); the
scripts that run inside the image are in ``hpcenv/bench/scripts`` (mounted read-only).
"""
