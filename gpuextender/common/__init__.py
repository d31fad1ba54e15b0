"""What both programs use and that is not the wire contract: backoff, CLI help, logging,
host:port parsing, credential files."""
