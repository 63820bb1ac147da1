"""The Recipe-Space Designer (DESIGN.md, layer 1): a catalog of what the project can do, designers that
turn it into a task-adapted `RecipeSpace` (offline rules, or an LLM through any OpenAI-compatible
endpoint), and redesign from trial evidence."""
