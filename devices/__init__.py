"""edgesmith.devices: run a build on real devices and bring the figures back.

- ``ssh.py``: verified asyncssh sessions (known_hosts, backoff, quoted commands, SFTP);
- ``transport.py``: the same verbs over SSH or as local subprocesses (``--local``);
- ``remote.py``: the single-file bench script that runs on the device (stdlib + runtime),
  naming no format; ``script.py`` embeds each format's device loader into it;
- ``bench.py``: the entry point, ``bench()``: one device or many, under the build's lock;
- ``build_folder.py`` (the manifest, checked), ``formats.py`` (the registered formats and
  a target's options on a device), ``prepare.py`` (each device's targets, builds done
  here), ``run.py`` (one device), ``merge.py`` (into manifest.json), ``verdict.py``;
- ``device.py``: what a device is, progress events; ``fleet.py``: which devices:
  ``--local``/``--host``/``--device`` or a fleet file.
"""
