"""One module per kind of job: what it prompts, how it reads outputs and how it scores them."""
