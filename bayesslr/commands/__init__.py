"""The CLI's verbs: :mod:`~bayesslr.commands.family` generates one verb per registered method
family from its registry entry; :mod:`~bayesslr.commands.run` holds ``run``, ``presets`` and
``report``; :mod:`~bayesslr.commands.methods` lists the families. Shared value parsing and
printing live in :mod:`~bayesslr.commands.common`.
"""
