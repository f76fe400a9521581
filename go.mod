module github.com/tetherhq/tether

go 1.26
