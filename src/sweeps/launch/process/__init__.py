"""How a process's jobs end: SIGINT/SIGTERM as exceptions, outcomes classified and counted."""
