package rawjson

import (
	"bytes"
	"errors"
	"strconv"
)

// JSON objects as JavaScript sees them: Fork and Summary reproduce what the
// SDK's JSON.parse, object spread and truthiness tests do, while keeping
// every key's order and every value's bytes as the agent wrote them.

var (
	Null  = []byte("null")
	True  = []byte("true")
	False = []byte("false")
)

// ObjectMember is one member of a JSON object.
type ObjectMember struct {
	Key    string // decoded
	RawKey []byte // as written, quotes included
	Val    []byte // as written
}

// Object is a JSON object's members in order, as JSON.parse builds it:
// when a key repeats, the member stays where it first appeared and takes
// the last value.
type Object []ObjectMember

// ParseObject splits data, one JSON value with optional JSON whitespace
// around it, into members. ok is false when data is not one well-formed JSON
// value (as encoding/json defines it, invalid UTF-8 aside), isObj when it is
// well-formed but not an object.
func ParseObject(data []byte) (obj Object, isObj, ok bool) {
	s := scanner{data: data}
	s.ws()
	if s.pos >= len(data) {
		return nil, false, false
	}
	if data[s.pos] != '{' {
		if s.value() != nil {
			return nil, false, false
		}
		s.ws()
		return nil, false, s.pos == len(data)
	}
	s.pos++
	s.ws()
	if s.pos < len(data) && data[s.pos] == '}' {
		s.pos++
		s.ws()
		return Object{}, true, s.pos == len(data)
	}
	var seen map[string]int
	for {
		if s.pos >= len(data) || data[s.pos] != '"' {
			return nil, false, false
		}
		ks := s.pos
		flags, err := s.str()
		if err != nil {
			return nil, false, false
		}
		rawKey := data[ks:s.pos]
		key := string(rawKey[1 : len(rawKey)-1])
		if flags != 0 {
			key = Unquote(NodeUTF8(rawKey[1 : len(rawKey)-1]))
		}
		s.ws()
		if s.pos >= len(data) || data[s.pos] != ':' {
			return nil, false, false
		}
		s.pos++
		s.ws()
		vs := s.pos
		if s.value() != nil {
			return nil, false, false
		}
		val := data[vs:s.pos]
		i := -1
		switch {
		case seen != nil:
			if j, ok := seen[key]; ok {
				i = j
			}
		case len(obj) >= 16: // many members: look keys up in a map from now on
			seen = make(map[string]int, 2*len(obj))
			for j, m := range obj {
				seen[m.Key] = j
			}
			if j, ok := seen[key]; ok {
				i = j
			}
		default:
			i = obj.index(key)
		}
		if i >= 0 {
			obj[i].Val = val
		} else {
			obj = append(obj, ObjectMember{Key: key, RawKey: rawKey, Val: val})
			if seen != nil {
				seen[key] = len(obj) - 1
			}
		}
		s.ws()
		if s.pos >= len(data) {
			return nil, false, false
		}
		if data[s.pos] == ',' {
			s.pos++
			s.ws()
			continue
		}
		if data[s.pos] != '}' {
			return nil, false, false
		}
		s.pos++
		break
	}
	s.ws()
	if s.pos != len(data) {
		return nil, false, false
	}
	return obj, true, true
}

// Compact returns the JSON value v without insignificant whitespace,
// and whether v is one well-formed JSON value.
func Compact(v []byte) ([]byte, bool) {
	s := scanner{data: v}
	s.ws()
	st := s.pos
	s.compact, s.out, s.seg = true, make([]byte, 0, len(v)), st
	if s.pos >= len(v) || s.value() != nil {
		return nil, false
	}
	s.flush()
	s.compact = false
	s.ws()
	return s.out, s.pos == len(v)
}

func (o Object) index(key string) int {
	for i := range o {
		if o[i].Key == key {
			return i
		}
	}
	return -1
}

func (o Object) Get(key string) ([]byte, bool) {
	if i := o.index(key); i >= 0 {
		return o[i].Val, true
	}
	return nil, false
}

func (o Object) Has(key string) bool { return o.index(key) >= 0 }

// Str returns the member key when it is a string, decoded.
func (o Object) Str(key string) (string, bool) {
	v, ok := o.Get(key)
	if !ok {
		return "", false
	}
	return StringValue(v)
}

// IsTrue reports whether member key is true (=== true).
func (o Object) IsTrue(key string) bool {
	v, ok := o.Get(key)
	return ok && bytes.Equal(v, True)
}

// Object returns member key when it is an object (not null, not an array).
func (o Object) Object(key string) Object {
	v, _ := o.Get(key)
	return ObjectOf(v)
}

// ObjectOf parses v when it is a JSON object, else returns nil.
func ObjectOf(v []byte) Object {
	if len(v) == 0 || v[0] != '{' {
		return nil
	}
	obj, isObj, ok := ParseObject(v)
	if !ok || !isObj {
		return nil
	}
	if obj == nil {
		obj = Object{}
	}
	return obj
}

// Set gives key the value val (raw JSON): in place when the key exists,
// else as a new last member, as an object spread does.
func (o Object) Set(key string, val []byte) Object {
	if i := o.index(key); i >= 0 {
		o[i].Val = val
		return o
	}
	return append(o, ObjectMember{Key: key, RawKey: AppendJSString(nil, key), Val: val})
}

// Del removes key, as an object spread does with a key set to undefined.
func (o Object) Del(key string) Object {
	if i := o.index(key); i >= 0 {
		return append(o[:i:i], o[i+1:]...)
	}
	return o
}

// AppendTo appends the object as compact JSON.
func (o Object) AppendTo(b []byte) []byte {
	b = append(b, '{')
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.RawKey...)
		b = append(b, ':')
		b = append(b, m.Val...)
	}
	return append(b, '}')
}

// StringValue decodes v when it is a JSON string.
func StringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	body := NodeUTF8(v[1 : len(v)-1])
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true
	}
	return Unquote(body), true
}

// Truthy reports whether the JSON value v is truthy in JavaScript: not
// false, null, 0 or "".
func Truthy(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case 'f', 'n':
		return false
	case '"':
		return len(v) > 2
	case 't', '{', '[':
		return true
	}
	return !IsZero(v)
}

// IsZero reports whether v is a JSON number equal to 0 in JavaScript
// (-0 and numbers too small for a double included).
func IsZero(v []byte) bool {
	if len(v) == 0 || !(v[0] == '-' || '0' <= v[0] && v[0] <= '9') {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f == 0 && (err == nil || errors.Is(err, strconv.ErrRange))
}

// EachValue calls fn with each element of the JSON array arr until fn
// returns false.
func EachValue(arr []byte, fn func(el []byte) bool) {
	s := scanner{data: arr}
	s.ws()
	if s.pos >= len(arr) || arr[s.pos] != '[' {
		return
	}
	s.pos++
	s.ws()
	if s.pos < len(arr) && arr[s.pos] == ']' {
		return
	}
	for s.pos < len(arr) {
		vs := s.pos
		if s.value() != nil {
			return
		}
		if !fn(arr[vs:s.pos]) {
			return
		}
		s.ws()
		if s.pos >= len(arr) || arr[s.pos] != ',' {
			return
		}
		s.pos++
		s.ws()
	}
}
