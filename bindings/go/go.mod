module example.invalid/libroute/go

go 1.21
