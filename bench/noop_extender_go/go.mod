module noopextender

go 1.22
