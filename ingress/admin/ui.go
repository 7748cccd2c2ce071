package admin

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// uiFiles is the operator console: static HTML, CSS and JavaScript, no
// build step and nothing loaded from elsewhere. It holds no data; every
// figure it shows comes from the admin API with the operator's token.
//
//go:embed ui
var uiFiles embed.FS

// uiHandler serves the console under /ui/.
func uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Only this origin's own files and API; no inline script, no frames.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// isConsolePath: the console's static shell, which loads without a token
// (it shows nothing until the operator gives one).
func isConsolePath(path string) bool {
	return path == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/")
}

func redirectToConsole(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusFound)
}
