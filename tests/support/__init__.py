"""What the tests share that is not a fixture: helpers, fakes, plugins and the simulated
vendor stacks (``simulated/``), named after what they do."""
