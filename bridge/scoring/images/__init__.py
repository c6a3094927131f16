"""Scoring images without a registry: base images, dependency sets and the disk, one wing each.

Three sub-packages, each with one public face (its ``__init__.py``): code outside a sub-package
imports only from its face. Imports point one way: ``sets`` -> ``base`` -> ``disk`` (``sets``
also uses ``disk``); ``disk`` imports neither (tests/test_architecture.py checks it).

Image family (every image carries ``rgbridge.owner=rgbridge`` and ``rgbridge.kind``):

* ``rgbridge-base:<recipe hash12>`` -- Debian minbase rootfs made with ``debootstrap`` from the
  mirror in the host's apt sources, with python3, a venv at ``/opt/venv`` first on PATH, user
  ``app`` (uid/gid 10001), ``/repo`` ``/tests`` ``/results`` owned by 10001, and the host's extra
  CA certificates trusted. Imported with ``docker import``; the rootfs tarball is cached.
* ``rgbridge-tester:<hash12>`` -- base + a separate venv ``/opt/tester``, first on PATH, so
  golden tests never share an interpreter with agent code.
* ``rgbridge-deps:<hash12>`` -- a base (or tester) image + ``pip install -r requirements.txt``
  into the image's active venv, keyed by the normalised requirements: one build container whose
  environment becomes a layer or fills a volume, both stores behind one protocol.

``base/`` -- base images and the build primitives every image uses:

* ``host`` -- host facts: the Debian mirror, extra CA certificates, pip index settings.
* ``rootfs`` -- the base rootfs (``debootstrap`` in two stages + ``chroot`` on the host; work
  ``Beside`` it in the same root); host commands.
* ``recipe`` -- what the base image holds and the recipe hash in its tag.
* ``image`` -- the rootfs image builder (``docker import``; the base and Java images) and the
  official Python image compat prefers.
* ``tester`` -- the tester image (one layer made beside the base's root, else a legacy build)
  and ``build_all`` (``rgbridge images build``).
* ``build`` -- build lock, hashes, labels, ``docker_build`` (legacy builder, no BuildKit),
  ``load_layer_image`` (a base plus one layer, ``docker load``), ``BuildResult``,
  ``DependencyInstallError``.
* ``wheelhouse`` -- where a build's wheels come from: the index probe, requirement checks, wheels
  the host's pip fetches, the ``uv`` binary.
* ``reqfile`` -- requirement files: normal form and what may be fetched.

``sets/`` -- dependency sets:

* ``deps`` -- ``ensure_deps_image``, the one flow over either store (lease, lock, budget, wheels).
* ``store`` -- the ``DepStore`` protocol, ``DepsImage`` (a ready set) and ``PendingCheck`` (a set
  handed out while pip checks it; ``DepsImage.settle`` settles it).
* ``layer`` -- the layer store; ``layer_export`` -- an environment folder as one image layer.
* ``volume_store`` -- the volume store; ``env_volume`` -- the volume primitives (seed, build,
  tag, the check container); ``reaper`` -- the compiles a process leaves running at exit,
  removed by a detached process.
* ``closest`` -- a never-seen set started from the closest finished set.
* ``twin`` -- a set made by another set's build from its environment after its first files
  (strict's set by compat's build).
* ``bytecode`` -- the bytecode store: cached wheels' compiled modules, copied into new sets
  (filled by ``assets/compile_wheels.py``).
* ``buildbox`` -- the build container (its install script is ``assets/install_set.sh``).
* ``buildnet`` -- the shared network namespace of build containers.

``disk/`` -- what the bridge keeps:

* ``pkgcache`` -- the host's wheel and Maven caches: folders, size caps, eviction.
* ``usage`` -- the usage books: last use, leases, sizes, evictions.
* ``inventory`` -- list and remove the image family; everything kept with sizes and last use.
* ``budget`` -- the disk budget (``RGBRIDGE_DISK_BUDGET``): eviction before a new set.
* ``labels`` -- the names that mark kept things on the engine (set by ``sets``, read here).

Every ``ensure_*`` call returns immediately when its tag exists.
"""
