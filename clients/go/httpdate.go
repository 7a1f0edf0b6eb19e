package squawk

import (
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
)

// parseHTTPDate reads a Retry-After date as the daemon does: a port of
// Python's email.utils.parsedate_to_datetime, step by step, so that every
// form it reads (IMF-fixdate, RFC 850, numeric and named zones, a month
// before the day, a time without seconds or with dots...) gives the same
// instant, and every form it refuses is refused here too. A date with no
// zone, an unknown zone or "-0000" (zone unknown, RFC 2822) names no
// instant, except the asctime form, which RFC 9110 defines as GMT. A value
// holding a non-ASCII digit is malformed, as the README says, wherever the
// digit stands.
func parseHTTPDate(value string) (time.Time, bool) {
	if strings.IndexFunc(value, isNonASCIIDigit) >= 0 {
		return time.Time{}, false
	}
	p, ok := parseDateParts(value)
	if !ok {
		return time.Time{}, false
	}
	if !p.hasZone && asctime.MatchString(strings.TrimFunc(value, isPySpace)) {
		p.offset, p.hasZone = 0, true
	}
	if !p.hasZone || !p.valid() {
		return time.Time{}, false
	}
	t := time.Date(int(p.year), time.Month(p.month), int(p.day), int(p.hour), int(p.minute), int(p.second), 0, time.UTC)
	return t.Add(-time.Duration(p.offset) * time.Second), true
}

// asctime is RFC 9110's asctime-date, the one form without a zone; a zone
// left out of any other layout still names no instant.
var asctime = regexp.MustCompile(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}$`)

// isNonASCIIDigit is a Unicode decimal digit other than 0-9, which
// Python's int() would read.
func isNonASCIIDigit(r rune) bool {
	return r > unicode.MaxASCII && unicode.IsDigit(r)
}

var (
	monthNames = []string{
		"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
		"january", "february", "march", "april", "may", "june", "july", "august", "september",
		"october", "november", "december",
	}
	dayNames = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}
	// zoneNames are Python's table, in its ±hhmm form.
	zoneNames = map[string]int64{
		"UT": 0, "UTC": 0, "GMT": 0, "Z": 0,
		"AST": -400, "ADT": -300, "EST": -500, "EDT": -400,
		"CST": -600, "CDT": -500, "MST": -700, "MDT": -600,
		"PST": -800, "PDT": -700,
	}
)

type dateParts struct {
	year, month, day, hour, minute, second int64
	// offset is east of UTC in seconds; hasZone is false for no zone,
	// an unknown one or "-0000".
	offset  int64
	hasZone bool
}

// valid is datetime's own range checks, and timezone's (an offset
// strictly within a day).
func (p dateParts) valid() bool {
	if p.year < 1 || p.year > 9999 || p.day < 1 || p.day > daysIn(p.year, p.month) {
		return false
	}
	if p.hour < 0 || p.hour > 23 || p.minute < 0 || p.minute > 59 || p.second < 0 || p.second > 59 {
		return false
	}
	return p.offset > -86400 && p.offset < 86400
}

func daysIn(year, month int64) int64 {
	return int64(time.Date(int(year), time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day())
}

// parseDateParts is email._parseaddr._parsedate_tz.
func parseDateParts(value string) (dateParts, bool) {
	data := strings.FieldsFunc(value, isPySpace)
	if len(data) == 0 {
		return dateParts{}, false
	}
	// The whitespace after the day name's comma is optional.
	if first := data[0]; strings.HasSuffix(first, ",") || slices.Contains(dayNames, strings.ToLower(first)) {
		data = data[1:]
	} else if i := strings.LastIndex(first, ","); i >= 0 {
		data[0] = first[i+1:]
	}
	if len(data) == 3 { // RFC 850: 06-Nov-94
		if stuff := strings.Split(data[0], "-"); len(stuff) == 3 {
			data = append(stuff, data[1:]...)
		}
	}
	if len(data) == 4 { // a zone glued to the time, or none
		s := data[3]
		i := strings.Index(s, "+")
		if i == -1 {
			i = strings.Index(s, "-")
		}
		if i > 0 {
			data = append(data[:3:3], s[:i], s[i:])
		} else {
			data = append(data, "")
		}
	}
	if len(data) < 5 {
		return dateParts{}, false
	}
	dd, mm, yy, tm, tz := data[0], data[1], data[2], data[3], data[4]
	if dd == "" || mm == "" || yy == "" {
		return dateParts{}, false
	}
	month := slices.Index(monthNames, strings.ToLower(mm))
	if month < 0 {
		dd, mm = mm, strings.ToLower(dd)
		if month = slices.Index(monthNames, mm); month < 0 {
			return dateParts{}, false
		}
	}
	dd = strings.TrimSuffix(dd, ",")
	if strings.Index(yy, ":") > 0 {
		yy, tm = tm, yy
	}
	if strings.HasSuffix(yy, ",") {
		if yy = yy[:len(yy)-1]; yy == "" {
			return dateParts{}, false
		}
	}
	if yy[0] < '0' || yy[0] > '9' {
		yy, tz = tz, yy
	}
	tm = strings.TrimSuffix(tm, ",")
	clock := strings.Split(tm, ":")
	if len(clock) == 1 && strings.Contains(tm, ".") {
		// Some non-compliant mailers use '.' between the time's parts.
		clock = strings.Split(tm, ".")
	}
	if len(clock) != 2 && len(clock) != 3 {
		return dateParts{}, false
	}
	if len(clock) == 2 {
		clock = append(clock, "0")
	}
	var p dateParts
	p.month = int64(month%12 + 1)
	for _, field := range []struct {
		text string
		to   *int64
	}{{yy, &p.year}, {dd, &p.day}, {clock[0], &p.hour}, {clock[1], &p.minute}, {clock[2], &p.second}} {
		n, ok := pyInt(field.text)
		if !ok {
			return dateParts{}, false
		}
		*field.to = n
	}
	if p.year < 100 {
		if p.year > 68 {
			p.year += 1900
		} else {
			p.year += 2000
		}
	}
	p.offset, p.hasZone = zoneOffset(tz)
	return p, true
}

// zoneOffset is a zone in seconds east of UTC; ok is false when it names
// no known zone (garbage, none, or "-0000").
func zoneOffset(zone string) (int64, bool) {
	zone = strings.ToUpper(zone)
	hhmm, ok := zoneNames[zone]
	if !ok {
		if hhmm, ok = pyInt(zone); !ok || (hhmm == 0 && strings.HasPrefix(zone, "-")) {
			return 0, false
		}
	}
	sign := int64(1)
	if hhmm < 0 {
		sign, hhmm = -1, -hhmm
	}
	return sign * ((hhmm/100)*3600 + (hhmm%100)*60), true
}

// pyInt is Python's int() on one whitespace-free token, over ASCII digits:
// an optional sign, digits and single underscores between digits. Past
// 2^40 it saturates, which every range check then refuses.
func pyInt(text string) (int64, bool) {
	s, sign := text, int64(1)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' && i > 0 && i+1 < len(s) && s[i-1] != '_' && s[i+1] != '_' {
			continue
		}
		if c < '0' || c > '9' {
			return 0, false
		}
		// Past any field's range, and far from overflowing once scaled.
		n = min(n*10+int64(c-'0'), 1<<40)
	}
	return sign * n, true
}
