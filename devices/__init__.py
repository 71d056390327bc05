"""edgesmith.devices: run a build on real devices and bring the figures back.

- ``ssh.py``: verified asyncssh sessions (known_hosts, backoff, quoted commands, SFTP);
- ``remote.py``: the single-file bench script that runs on the device (stdlib + runtime);
- ``transport.py``: the same verbs over SSH or as local subprocesses (``--local``);
- ``bench.py``: one device or many: upload, verify, run per target, save, merge, budgets;
- ``fleet.py``: which devices: ``--local``/``--host``/``--device`` or a fleet file.
"""
