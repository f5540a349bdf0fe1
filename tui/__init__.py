"""specem-chat: a Textual app that shows several local models writing one answer together."""
