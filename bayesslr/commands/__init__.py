"""CLI verbs, one module each; every module defines ``register(app)``.

The modules stay thin: parse options, build a :class:`bayesslr.registry.Cell` (or a sweep
config), call the library, print. Shared option parsing and output live in
:mod:`bayesslr.commands.common`.
"""
