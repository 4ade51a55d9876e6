// Package damage finds what is wrong with a transcript file and repairs it:
// lines that do not parse or hold bytes the API refuses (ClassifyLine), the
// parentUuid chain as the official readers follow it, tool_use /
// tool_result pairing across turns (Check), and a rewrite of the file
// without the damage (Repair). Repair's goldens are under testdata/damaged.
package damage
