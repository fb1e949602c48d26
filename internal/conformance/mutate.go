package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Mutate loads the vector file name, lets edit change its JSON tree (maps,
// slices, json.Number, strings, bools), and decodes the result into v: an
// altered copy of the expected data, for showing that the runner notices
// when the data describes a library that breaks the contract.
func Mutate(name string, v any, edit func(root map[string]any) error) error {
	b, err := os.ReadFile(filepath.Join(Dir(), name))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return err
	}
	if err := edit(root); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	out, err := json.Marshal(root)
	if err != nil {
		return err
	}
	return decodeStrict(out, v)
}

// Named finds the element of the list at root[key] whose field equals
// value (e.g. the topology named "contract example").
func Named(root map[string]any, key, field, value string) (map[string]any, error) {
	list, ok := root[key].([]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a list", key)
	}
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m[field] == value {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no element of %s has %s %q", key, field, value)
}

// Raw parses a JSON literal for an edit: Raw(`{"double": 40000}`).
func Raw(s string) any {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic(err)
	}
	return v
}
