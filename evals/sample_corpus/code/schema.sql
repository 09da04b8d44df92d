-- Schema of the roastery's order database; a semicolon in a comment; does not split statements.
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    city TEXT
);

CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER REFERENCES customers(id),
    kilograms REAL NOT NULL CHECK (kilograms > 0),
    status TEXT DEFAULT 'PLACED'
);

INSERT INTO customers (id, name, city) VALUES (1, 'Cafe Aurora; Lisbon branch', 'Lisbon');

UPDATE orders SET status = 'SHIPPED' WHERE kilograms > 5;

CREATE VIEW big_orders AS SELECT * FROM orders WHERE kilograms > 5;
