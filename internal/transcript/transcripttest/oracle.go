package transcripttest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Oracle says what Normalize must do with raw, using encoding/json and
// code independent of the scanner under test.
func Oracle(raw []byte) (out []byte, uuid string, ok bool) {
	if !json.Valid(raw) {
		return nil, "", false
	}
	if trimmed := bytes.TrimLeft(raw, " \t\r\n"); trimmed[0] != '{' {
		return nil, "", false
	}
	if bytes.IndexByte(raw, 0) >= 0 || !utf8.Valid(raw) {
		return nil, "", false
	}
	uuid, ok = oracleUUID(raw)
	if !ok {
		return nil, "", false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		panic(err) // json.Valid said yes
	}
	return buf.Bytes(), uuid, true
}

// oracleUUID walks the top-level members of a valid JSON object with
// encoding/json's Decoder: every "uuid" member must be a string or null,
// and the last one is the entry's uuid.
func oracleUUID(obj []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		panic(err)
	}
	uuid := ""
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			panic(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		if k != "uuid" {
			continue
		}
		switch v[0] {
		case '"':
			if err := json.Unmarshal(v, &uuid); err != nil {
				panic(err)
			}
		case 'n':
			uuid = ""
		default:
			return "", false
		}
	}
	return uuid, true
}

// OracleTopLevelString is rawjson.TopLevelString done with encoding/json.
func OracleTopLevelString(line []byte, key string) (string, bool) {
	var m map[string]json.RawMessage
	if !json.Valid(line) || json.Unmarshal(line, &m) != nil || m == nil {
		return "", false
	}
	v, ok := m[key]
	if !ok || v[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		panic(err)
	}
	return s, true
}

// Shorten quotes b for a test message, cut to about 200 bytes.
func Shorten(b []byte) string {
	s := string(b)
	if len(s) > 200 {
		s = s[:100] + "..." + s[len(s)-100:]
	}
	return strings.ToValidUTF8(strconv.Quote(s), "?")
}
