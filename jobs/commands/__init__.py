"""``sparklog`` sub-commands, one module each.

Every module here defines ``register(subparsers)``, which adds its commands and
sets ``handler=`` on each parser; ``jobs.cli`` discovers the modules, so adding
a command never touches a shared file. Handlers import heavy packages (Spark)
inside themselves, so ``sparklog gateway`` starts fast.
"""
