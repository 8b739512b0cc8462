package main

import "minimax-m3/components"

func main() { components.Run(components.Program) }
