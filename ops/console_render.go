package ops

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// parsePages parses each page template with the layout around it.
func parsePages(base string) (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"link": func(segs ...string) string { return consolePath(base, segs...) },
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return time.Since(t).Round(time.Second).String() + " ago"
		},
		"redact": redactText,
		"cut": func(n int, s string) string {
			if len(s) <= n {
				return s
			}
			for n > 0 && !utf8.RuneStart(s[n]) {
				n--
			}
			return s[:n] + "…"
		},
		"percent": func(done, total int) int {
			if total <= 0 {
				return 100
			}
			return done * 100 / total
		},
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "queue", "group", "message", "job", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(consoleFiles, "console/templates/layout.html", "console/templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ops: console: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// render writes a page; data gets the fields every page uses.
func (c *Console) render(w http.ResponseWriter, r *http.Request, page string, data map[string]any) {
	data["CSRF"] = c.csrf
	data["ReadOnly"] = c.opts.ReadOnly
	data["Page"] = page
	if c.opts.Management != "" {
		data["Management"] = mq.Redact(c.opts.Management)
	}
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, data); err != nil {
		c.log.Error("acemq.console.render.failed", "page", page, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
}

// urlPattern finds URLs in text, for redactText: a URL runs to a space,
// tab, newline, quote or angle bracket. Other control characters do not
// end it, so a password with one in it (which makes the URL unparseable)
// is hidden with the rest.
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://[^ \t\n"'<>]+`)

// redactText returns s with every URL in it that has user info or a query
// redacted as mq.Redact does, so no credential is ever rendered.
func redactText(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlPattern.ReplaceAllStringFunc(s, func(u string) string {
		if strings.ContainsAny(u, "@?#") {
			return mq.Redact(u)
		}
		return u
	})
}

// headerRow is one header, its value as text.
type headerRow struct{ Key, Type, Value string }

func headerRows(h amqp.Table) []headerRow {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rows := make([]headerRow, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, headerRow{k, fmt.Sprintf("%T", h[k]), redactText(headerText(h[k]))})
	}
	return rows
}

// headerText shows a header value: text as is, times in UTC, tables and
// arrays nested.
func headerText(v any) string {
	switch v := v.(type) {
	case nil:
		return "(void)"
	case string:
		return v
	case []byte:
		if utf8.Valid(v) {
			return string(v)
		}
		return "0x" + hex.EncodeToString(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339)
	case amqp.Table:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + headerText(v[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = headerText(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	default:
		return fmt.Sprint(v)
	}
}

// maxBodyShown caps how much of a body the message page shows.
const maxBodyShown = 256 << 10

// shownBody is a body as the message page shows it.
type shownBody struct {
	Kind, Text string // Kind: empty, json, text, binary
	Size       int
	Cut        bool
}

// showBody pretty-prints JSON, shows UTF-8 text as is and anything else
// as a hex dump of its first KiB.
func showBody(b []byte) shownBody {
	s := shownBody{Size: len(b)}
	switch {
	case len(b) == 0:
		s.Kind = "empty"
	case len(b) <= maxBodyShown && json.Valid(b):
		var out bytes.Buffer
		_ = json.Indent(&out, b, "", "  ")
		s.Kind, s.Text = "json", redactText(out.String())
	case utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r < ' ' && r != '\n' && r != '\r' && r != '\t' }):
		if len(b) > maxBodyShown {
			b, s.Cut = b[:maxBodyShown], true
			for len(b) > 0 && !utf8.Valid(b) {
				b = b[:len(b)-1]
			}
		}
		s.Kind, s.Text = "text", redactText(string(b))
	default:
		if len(b) > 1024 {
			b, s.Cut = b[:1024], true
		}
		s.Kind, s.Text = "binary", hex.Dump(b)
	}
	return s
}
