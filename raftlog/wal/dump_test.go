package wal

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

func dumpCorrupt(err error, dir string) {
	var ce *CorruptError
	if errors.As(err, &ce) {
		data, _ := os.ReadFile(ce.File)
		off := int(ce.Offset)
		h := readFrameHeader(data[off:])
		fmt.Printf("header at %d: %+v size %d\n", off, h, len(data))
		hs, _ := decodeSegmentHeader(data)
		fmt.Println("seg header seq", hs)
		out, _ := exec.Command("ls", "-la", dir).CombinedOutput()
		fmt.Println(string(out))
		exec.Command("cp", "-r", dir, "/tmp/walfail").Run()
	}
}
