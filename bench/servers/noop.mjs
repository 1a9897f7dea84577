// An app that does nothing: start-phases.js times the worker's preloads, not the app.
