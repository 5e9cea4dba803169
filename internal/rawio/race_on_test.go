//go:build linux && race

package rawio

const raceOn = true
