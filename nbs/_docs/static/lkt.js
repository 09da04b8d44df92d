// LKT docs: opened straight from disk (file://) a browser forbids fetch(), which Sphinx's search uses to show a summary
// under each result; there, show the results without summaries instead of logging errors.
if (window.location.protocol === "file:" && typeof DOCUMENTATION_OPTIONS !== "undefined") {
  DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
}
