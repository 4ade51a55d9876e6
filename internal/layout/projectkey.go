package layout

import (
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxProjectKeyPrefix is where the SDK cuts a long project key before
// appending the hash.
const maxProjectKeyPrefix = 200

// ProjectKeyFromCwd derives the project key of a working directory exactly
// as the TypeScript Agent SDK does, so that sessiond's files land in the
// folder the agent and the official readers use:
//
//	canonical = realpath(resolve(cwd)), NFC-normalised on macOS only
//	key       = canonical with every UTF-16 code unit outside [A-Za-z0-9]
//	            replaced by '-'; if longer than 200, the first 200 + '-' +
//	            base-36 |hash(canonical)|
//
// A character outside the BMP is two code units and so becomes "--". When
// realpath fails (the folder does not exist here), the resolved path is
// used as is, as in the SDK.
//
// Unlike the SDK, which resolves a relative path against its own working
// directory, sessiond receives the cwd from another process, so cwd must be
// absolute. It must also be valid UTF-8 without NUL.
//
// The SDK lets CLAUDE_CODE_PROJECT_DIR_NAME replace the derived key when
// CLAUDE_CONFIG_DIR is set; that override lives in the agent's environment,
// so a caller that uses it must send the project key itself.
func ProjectKeyFromCwd(cwd string) (string, error) {
	canon, err := canonicalCwd(cwd, runtime.GOOS == "darwin")
	if err != nil {
		return "", err
	}
	return projectKeyOf(canon), nil
}

// canonicalCwd is the SDK's canonicalisation, with NFC applied when nfc is
// set (the SDK does so on darwin only).
func canonicalCwd(cwd string, nfc bool) (string, error) {
	const want = "want the absolute path of the agent's working directory"
	switch {
	case cwd == "":
		return "", invalidf("cwd is empty; %s", want)
	case !utf8.ValidString(cwd):
		return "", invalidf("cwd %s is not valid UTF-8; %s", quote(cwd), want)
	case strings.IndexByte(cwd, 0) >= 0:
		return "", invalidf("cwd %s contains a NUL byte; %s", quote(cwd), want)
	case !filepath.IsAbs(cwd):
		return "", invalidf("cwd %s is a relative path, which sessiond cannot resolve against the caller's working directory; %s", quote(cwd), want)
	}
	// filepath.Clean does what path.resolve does to an absolute path:
	// it drops ".", "..", repeated and trailing separators.
	p := filepath.Clean(cwd)
	// Node's fs.realpathSync decodes every link target as UTF-8 and looks
	// the decoded name up again, so a target that is not valid UTF-8 makes
	// it fail with ENOENT and the SDK keeps the unresolved path; do the
	// same rather than hash bytes the SDK never sees.
	if r, err := filepath.EvalSymlinks(p); err == nil && utf8.ValidString(r) {
		p = r
	}
	if nfc {
		p = norm.NFC.String(p)
	}
	return p, nil
}

// projectKeyOf is the SDK's key function applied to a canonical path; s
// must be valid UTF-8 for the result to match the SDK.
func projectKeyOf(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
			b = append(b, byte(r))
		case r > 0xFFFF: // a surrogate pair in UTF-16: two code units
			b = append(b, '-', '-')
		default:
			b = append(b, '-')
		}
	}
	if len(b) <= maxProjectKeyPrefix {
		return string(b)
	}
	h := int64(sdkHash(s))
	if h < 0 {
		h = -h // Math.abs(-2^31) is 2^31 in JavaScript: no overflow in int64
	}
	return string(b[:maxProjectKeyPrefix]) + "-" + strconv.FormatInt(h, 36)
}

// sdkHash is the SDK's 32-bit string hash over UTF-16 code units,
// h = ((h<<5) - h + c) | 0, which is h*31 + c with int32 wraparound.
func sdkHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r > 0xFFFF {
			hi, lo := utf16.EncodeRune(r)
			h = h*31 + hi
			h = h*31 + lo
			continue
		}
		h = h*31 + r
	}
	return h
}
