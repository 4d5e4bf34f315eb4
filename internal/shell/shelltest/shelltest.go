// Package shelltest holds the shell breakouts the injection tests try in
// every value that reaches a shell.
package shelltest

// Breakouts of a shell word: each creates the file Pwned in the working
// directory if a shell runs it as code instead of reading it as data.
var Breakouts = []string{
	`'; touch pwned; '`,
	`$(touch pwned)`,
	"`touch pwned`",
	`; touch pwned`,
	` && touch pwned`,
	` && touch pwned #`,
	"\ntouch pwned",
	`"; touch pwned; "`,
	`\'; touch pwned; #`,
	`${IFS}$(touch${IFS}pwned)`,
}

// Pwned is the file a breakout creates when it runs.
const Pwned = "pwned"
