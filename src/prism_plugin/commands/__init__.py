"""prism-run subcommands, one module each (registered in prism_plugin.cli.COMMAND_MODULES)."""
