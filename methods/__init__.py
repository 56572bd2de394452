"""The methods, one room each: a method's report tables, transitions and protocol text beside one another."""
