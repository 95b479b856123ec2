module tern.test/upstream

go 1.22
