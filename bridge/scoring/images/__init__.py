"""Scoring images without a registry: base (debootstrap + ``docker import``), tester, deps.

Image family (every image carries ``rgbridge.owner=rgbridge`` and ``rgbridge.kind``):

* ``rgbridge-base:<recipe hash12>`` -- Debian minbase rootfs made with ``debootstrap`` from the
  mirror in the host's apt sources (``host``, ``rootfs``), with python3, a venv at ``/opt/venv``
  first on PATH, user ``app`` (uid/gid 10001), ``/repo`` ``/tests`` ``/results`` owned by 10001,
  and the host's extra CA certificates trusted (``recipe``). Imported with ``docker import``
  (``base``); the rootfs tarball is cached.
* ``rgbridge-tester:<hash12>`` -- base + a separate venv ``/opt/tester`` (``tester``), first on
  PATH, so golden tests never share an interpreter with agent code.
* ``rgbridge-deps:<hash12>`` -- a base (or tester) image + ``pip install -r requirements.txt``
  into the image's active venv, keyed by the normalised requirements (``deps``): one build
  container (``buildbox``) whose environment becomes a layer (``layer``) or fills a volume
  (``env_volume``), both stores behind one protocol (``store``); wheels from the host's package
  cache, the index, or binary wheels the host's pip fetched (``wheelhouse``).

Base and tester images use docker-py's low-level ``api.build`` (``build``: legacy builder, no
BuildKit). ``inventory`` lists and removes the family. Every ``ensure_*`` call returns
immediately when its tag exists. Each concept has one home: import from the defining module.
"""
