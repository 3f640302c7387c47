"""ooblab: command-line entry point of the resilient-training testbed."""
