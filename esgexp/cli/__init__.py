"""The console commands: each turns a command line into a job or a report, and errors into exit codes."""
